"""The package is parts: lower layers never import higher ones, functions
stay small, importing it draws no figure library, and what it declares
(setup.py, environment.yml) and shows users stays in step."""
import ast
import importlib.metadata
import re
import subprocess
import sys

from helpers import ROOT

PACKAGE = ROOT / "partorch"
# Each module may import only modules of a lower layer.
LAYERS = [
    {"errors"},
    {"chem", "logs"},
    {"molecule_csv", "tokenizer"},
    {"splits", "datasets", "sampler", "tasks", "rnn", "distributed"},
    {"loaders", "checkpoint", "plots"},
    {"evaluation", "report", "flags"},
    {"__init__"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}
MAX_PARAMETERS = 8


def _package_imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            yield node.module.split(".")[0]


def test_every_module_has_a_layer_and_imports_only_lower_ones():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == set(LAYER_OF), modules ^ set(LAYER_OF)
    for path in PACKAGE.glob("*.py"):
        for imported in _package_imports(path):
            assert LAYER_OF[imported] < LAYER_OF[path.stem], f"{path.stem} imports {imported}"


def test_no_function_takes_more_than_eight_parameters():
    files = [*PACKAGE.glob("*.py"), *(ROOT / "scripts").glob("*.py"), *(ROOT / "examples").glob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                named = [a for a in arguments if a.arg not in ("self", "cls")]
                assert len(named) <= MAX_PARAMETERS, f"{path.name}:{node.lineno} {node.name} takes {len(named)}"


def test_importing_the_package_loads_no_figure_library():
    code = "import sys, partorch; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_importing_the_package_works_without_matplotlib():
    code = "import sys; sys.modules['matplotlib'] = None; import partorch; print(partorch.RNNPredictor.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "RNNPredictor", done.stderr


def _requirement_name(text):
    return re.split(r"[<>=;\[ ]", text.strip(), maxsplit=1)[0].lower()


def test_environment_yml_holds_what_setup_py_installs_with_every_extra():
    declared = {_requirement_name(r) for r in importlib.metadata.requires("partorch")}
    lines = (ROOT / "environment.yml").read_text().split("dependencies:")[1].splitlines()
    conda = {_requirement_name(line.strip()[2:]) for line in lines if line.strip().startswith("- ")}
    conda = {"torch" if name == "pytorch" else name for name in conda} - {"python", "pip"}
    assert conda == declared, conda ^ declared
    setup = (ROOT / "setup.py").read_text()
    floor = re.search(r'"torch>=([\d.]+)"', setup).group(1)
    assert f"pytorch>={floor}" in (ROOT / "environment.yml").read_text()


def test_nothing_user_facing_names_the_development_data_folder():
    """Users have a clone, not the folder CI keeps beside it: only tests and CI may name it."""
    skip = {"tests", "runs", "__pycache__", "node_modules"}
    found = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if any(p.startswith(".") or p in skip or p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if path.suffix in {".py", ".md", ".ipynb", ".yml", ".toml", ".sbatch", ".txt", ".cfg", ".sh"}:
            found += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                      if "../shared" in line]
    assert found == []

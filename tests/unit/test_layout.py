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
# Each module may import only modules of a lower layer; a folder's modules are named folder.module.
LAYERS = [
    {"ddp.errors"},
    {"ddp.logs"},
    {"ddp.distributed", "ddp.data", "ddp.sampler", "ddp.preemption"},
    {"ddp.files"},
    {"ddp.loaders", "ddp.checkpoint", "ddp.plots", "ddp.evaluation"}
    | {"ddp.config", "ddp.html_report"},
    {"ddp.run_dir", "ddp.report", "ddp.flags"},
    {"ddp.optimization"},
    {"molecules.chem", "molecules.chunked"},
    {"molecules.cached"},
    {"molecules.table", "molecules.tokenizer", "molecules.features"},
    {"molecules.splits", "molecules.datasets", "molecules.tasks", "molecules.rnn"},
    {"molecules.prepared", "molecules.pretraining"},
    {"molecules.data", "molecules.inference", "molecules.flags"},
    {"ddp.__init__", "molecules.__init__"},
    {"__init__"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def _module_name(path):
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def _package_imports(path):
    """The package modules `path` imports, as folder.module names."""
    here = _module_name(path).rsplit(".", 1)[0] if path.parent != PACKAGE else ""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here if node.level == 1 else ""
            name = ".".join(part for part in (base, node.module or "") if part)
            yield name if name in LAYER_OF else f"{name}.__init__"


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer_and_imports_only_lower_ones():
    modules = {_module_name(p) for p in _modules()}
    assert modules == set(LAYER_OF), modules ^ set(LAYER_OF)
    for path in _modules():
        for imported in _package_imports(path):
            assert LAYER_OF[imported] < LAYER_OF[_module_name(path)], f"{path} imports {imported}"


def test_no_generic_part_imports_a_molecule_part():
    for path in (PACKAGE / "ddp").glob("*.py"):
        for imported in _package_imports(path):
            assert not imported.startswith("molecules"), f"{path.name} imports {imported}"
        assert "import partorch" not in path.read_text()  # nor through the top package


def test_importing_the_package_loads_no_figure_library():
    code = "import sys, partorch; print('matplotlib' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        == "False"
    )


def test_importing_the_package_works_without_matplotlib():
    code = (
        "import sys; sys.modules['matplotlib'] = None; import partorch; "
        "print(partorch.RNNPredictor.__name__)"
    )
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
        if (
            any(p.startswith(".") or p in skip or p.endswith(".egg-info") for p in parts)
            or not path.is_file()
        ):
            continue
        if path.suffix in {
            ".py",
            ".md",
            ".ipynb",
            ".yml",
            ".toml",
            ".sbatch",
            ".txt",
            ".cfg",
            ".sh",
        }:
            found += [
                f"{path.relative_to(ROOT)}:{n}"
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if "../shared" in line
            ]
    assert found == []

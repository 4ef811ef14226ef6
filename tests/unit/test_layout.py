"""The package is parts: lower layers never import higher ones, functions
stay small, and importing it draws no figure library."""
import ast
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

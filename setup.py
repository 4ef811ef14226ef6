from pathlib import Path

from setuptools import find_packages, setup

# Kept in step with environment.yml (conda) by a test.
NOTEBOOKS = ["jupyterlab", "optuna"]
TEST = [
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "optuna",
    "nbclient",
    "nbformat",
    "ipykernel",
    "ruff",
]

setup(
    name="partorch",
    version="0.1.0",
    description=(
        "A data-parallel (DDP) training template: SMILES LSTM classifier on MoleculeNet BBBP"
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["partorch", "partorch.*"]),
    license="MIT",
    license_files=["LICENSE"],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Chemistry",
    ],
    python_requires=">=3.10",
    # torch: the oldest release this project has been run with (see the README)
    # rdkit: molecules are read as canonical SMILES by default (and split by scaffold)
    # pyyaml: --config files and each run's config.yaml; pyarrow: predict.py's Parquet output
    install_requires=[
        "torch>=2.13",
        "numpy",
        "pandas",
        "scikit-learn",
        "tensorboard",
        "tqdm",
        "matplotlib",
        "rdkit",
        "pyyaml",
        "pyarrow",
    ],
    # bench: benchmarks/speed.py --lightning alone; nothing else imports Lightning
    extras_require={"notebooks": NOTEBOOKS, "test": TEST, "bench": ["lightning", "torchmetrics"]},
)

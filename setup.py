from setuptools import find_packages, setup

setup(
    name="partorch",
    version="0.1.0",
    description="A data-parallel (DDP) training template: SMILES LSTM classifier on MoleculeNet BBBP",
    packages=find_packages(include=["partorch", "partorch.*"]),
    license="MIT",
    python_requires=">=3.9",
    install_requires=["torch>=2.2", "numpy", "pandas", "scikit-learn", "tensorboard", "tqdm", "matplotlib"],
    extras_require={"test": ["pytest", "pytest-timeout", "rdkit", "nbclient", "nbformat", "ipykernel"], "chem": ["rdkit"]},
)

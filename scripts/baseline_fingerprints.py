"""The baseline a chemist would try first: a random forest on Morgan
fingerprints, with the same splits and seeds as the network.

    python scripts/baseline_fingerprints.py dataset/BBBP.csv
    python scripts/baseline_fingerprints.py dataset/BBBP.csv --split scaffold --seed 2

Needs RDKit (pip install -e '.[chem]'). Prints `Final test ROC AUC: 0.xxxx`
like the training scripts, so the two compare line for line.
"""
import argparse
import json
from pathlib import Path
import sys

from sklearn.ensemble import RandomForestClassifier

from partorch import read_molecule_csv, run_main
from partorch.chem import morgan_fingerprints, unparsable_smiles
from partorch.splits import SPLITS, split_molecules
from partorch.tasks import BinaryClassification, choose_task_kind


def main(args):
    # as the training scripts do: no scaffold without a parsed molecule
    table = read_molecule_csv(args.dataset, args.smiles_column, [args.label_column], parse=args.split == "scaffold")
    bad = unparsable_smiles(table.smiles)
    if bad:
        print(f"warning: {len(bad)} SMILES RDKit cannot parse get an empty fingerprint", file=sys.stderr)
    splits = split_molecules(table, args.split, args.seed, choose_task_kind("classification", table))
    labels = table.labels[:, 0].astype(int)
    features = morgan_fingerprints(table.smiles, args.radius, args.bits)
    forest = RandomForestClassifier(n_estimators=args.trees, random_state=args.seed, n_jobs=args.jobs)
    forest.fit(features[splits.train], labels[splits.train])
    task = BinaryClassification(table.label_columns)
    scores = {name: task.task_metrics(labels[idx], forest.predict_proba(features[idx])[:, 1])["roc_auc"]
              for name, idx in (("dev", splits.dev), ("test", splits.test))}
    if args.output_dir:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.output_dir) / "metrics.json").write_text(json.dumps(
            {"test_roc_auc": scores["test"], "dev_roc_auc": scores["dev"], "seed": args.seed, "split": args.split}))
    print(f"Final test ROC AUC: {scores['test']:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--smiles-column", default="smiles", help="(default: %(default)s)")
    parser.add_argument("--label-column", default="p_np", help="(default: %(default)s)")
    parser.add_argument("--split", choices=SPLITS, default="stratified", help="(default: %(default)s)")
    parser.add_argument("--random-seed", "--seed", dest="seed", type=int, default=1729, help="(default: %(default)s)")
    parser.add_argument("--trees", type=int, default=500, help="(default: %(default)s)")
    parser.add_argument("--radius", type=int, default=2, help="Morgan radius (default: %(default)s)")
    parser.add_argument("--bits", type=int, default=2048, help="fingerprint length (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=-1, help="parallel trees, -1 = all cores (default: %(default)s)")
    parser.add_argument("--output-dir", help="also write metrics.json here")
    run_main(main, parser)

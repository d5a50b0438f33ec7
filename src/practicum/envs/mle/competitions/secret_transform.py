"""A secret, seeded re-encoding of a prepared split, so its answers cannot be looked up in the
public dataset it was cut from.

The bundled competitions come from package data (scikit-learn, statsmodels, pydoc). Even with
those files hidden from the sandbox (`source_data`), copies exist elsewhere; so after
prepare.py (and its checksum check) the split is re-encoded with a secret drawn per machine:

- every numeric feature column: x -> a * x + b, with a secret a in [1/4, 4] and a secret shift
  b of 5 to 25 standard deviations (either sign). The same map goes to train and test, so a
  model fitted on train.csv sees one consistent feature space;
- class labels of multi-class tasks (task: multiclass or text-classification): a secret
  derangement of the label set, applied to train, answers and the sample submission (a lookup
  of the original labels then names the wrong class on every row).

Positive affine maps leave every leaderboard baseline's score unchanged up to float rounding
(standardised pipelines undo them; trees, boosting and naive Bayes are invariant), and a label
permutation leaves every symmetric metric unchanged, so the bundled leaderboard.csv stays
valid without being re-derived. A model fitted on the raw public dataset meets features
shifted by many standard deviations and predicts nearly a constant.

The secret: `$PRACTICUM_MLE_SECRET` (hex), else a random key kept in
`~/.cache/practicum/mle-secret` (mode 0600, created on first use). Both stay outside the
sandbox: the environment is not inherited and the key file is one of `source_data`'s hidden
paths.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

import numpy as np
import pandas as pd

SECRET_ENV = "PRACTICUM_MLE_SECRET"
LABEL_TASKS = ("multiclass", "text-classification", "text_classification")
NOTE = (
    "\n\nNote: in this copy of the competition every numeric feature is re-encoded by a fixed "
    "secret linear map (so its units are not the ones named above){labels}. Train and test use "
    "the same encoding; fit your model on train.csv."
)


def secret_file() -> Path:
    """Where the machine's key lives: ~/.cache/practicum/mle-secret."""
    return Path.home() / ".cache" / "practicum" / "mle-secret"


def machine_secret() -> bytes:
    """The key: $PRACTICUM_MLE_SECRET (hex), else the key file (created with 32 random bytes)."""
    given = os.environ.get(SECRET_ENV)
    if given:
        return bytes.fromhex(given.strip())
    path = secret_file()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(staging, path)  # atomic; a concurrent first use keeps the winner's key
        except FileExistsError:
            pass
        finally:
            staging.unlink()
    return bytes.fromhex(path.read_text().strip())


def fingerprint(secret: bytes) -> str:
    """A public name of the key (prepared data records it; a new key means re-preparing)."""
    return hmac.new(secret, b"practicum-mle:fingerprint", hashlib.sha256).hexdigest()[:16]


def _rng(secret: bytes, cid: str) -> np.random.Generator:
    digest = hmac.new(secret, f"practicum-mle:{cid}".encode(), hashlib.sha256).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def derangement(labels: list[str], rng: np.random.Generator) -> dict[str, str]:
    """A secret permutation of `labels` with no fixed point (identity for fewer than 2)."""
    if len(labels) < 2:
        return {x: x for x in labels}
    while True:
        order = rng.permutation(len(labels))
        if all(order[i] != i for i in range(len(labels))):
            return {labels[i]: labels[int(order[i])] for i in range(len(labels))}


def apply(
    public: Path,
    private: Path,
    *,
    cid: str,
    id_column: str,
    targets: list[str],
    task: str | None,
    answers_name: str,
    sample_name: str,
    secret: bytes,
) -> dict:
    """Re-encode the prepared files in place (module docstring). Returns what was changed
    (column names and counts, never the secret parameters)."""
    rng = _rng(secret, cid)
    train = pd.read_csv(public / "train.csv")
    test = pd.read_csv(public / "test.csv")
    answers = pd.read_csv(private / answers_name)
    sample = pd.read_csv(public / sample_name)
    features = [c for c in test.columns if c != id_column and c not in targets]
    encoded = []
    for column in features:
        if not (
            pd.api.types.is_numeric_dtype(train[column])
            and pd.api.types.is_numeric_dtype(test[column])
        ):
            continue
        values = pd.concat([train[column], test[column]]).astype(float)
        spread = float(values.std()) or 1.0
        scale = float(np.exp(rng.uniform(np.log(0.25), np.log(4.0))))
        shift = float(rng.choice([-1.0, 1.0]) * rng.uniform(5.0, 25.0) * spread * scale)
        for frame in (train, test):
            frame[column] = frame[column].astype(float) * scale + shift
        encoded.append(column)
    relabelled = []
    if (task or "").lower() in LABEL_TASKS:
        for column in targets:
            labels = sorted({str(v) for v in pd.concat([train[column], answers[column]])})
            mapping = derangement(labels, rng)
            for frame in (train, answers, sample):
                if column in frame.columns:
                    frame[column] = frame[column].astype(str).map(mapping)
            relabelled.append(column)
    train.to_csv(public / "train.csv", index=False)
    test.to_csv(public / "test.csv", index=False)
    answers.to_csv(private / answers_name, index=False)
    sample.to_csv(public / sample_name, index=False)
    return {"encoded_features": encoded, "relabelled_targets": relabelled}


def note(relabels: bool) -> str:
    """The sentence appended to the description of a re-encoded competition."""
    labels = (
        " and which name stands for which class is a secret permutation of the class names"
        if relabels
        else ""
    )
    return NOTE.format(labels=labels)

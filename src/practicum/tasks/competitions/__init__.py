"""The bundled suite of mini-competitions (MLE-bench layout), one folder per competition.

Every folder builds its data offline from a package that practicum already depends on
(scikit-learn's and statsmodels' bundled datasets) or from a snapshot file inside the folder,
so `raw` is unused here. `build_suite.py` regenerates the snapshot, checksums.yaml and
leaderboard.csv files; `_common.py` holds the split-and-write step every prepare.py shares.
Load them through `practicum.envs.mle.competitions.loading` (`list_competitions`,
`load_competition`).
"""

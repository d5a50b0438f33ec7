"""The competitions library: MLE-bench-style folders, their data, their graders.

    comp = load_competition("iris-species")            # loading: find and check a folder
    paths = comp.prepare(data_root)                     # prepared_data: public / private files
    report = grade_submission(comp, "submission.csv")   # grading: score, medal, or why invalid
                                                        # (the medal rule: `medals`)

A competition's own grade.py builds on `metrics` and `submission_checks`; folders copied from
MLE-bench run through `mlebench_compat`. Nothing here knows about agents or rewards.
"""

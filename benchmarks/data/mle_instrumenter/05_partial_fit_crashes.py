import pandas as pd
from sklearn.ensemble import GradientBoostingClassifier

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X = train.drop(columns=["id"])  # forgot to drop the target: fit fails on the strings
y = train["species"]
model = GradientBoostingClassifier()
model.fit(X, y)
preds = model.predict(test.drop(columns=["id"]))
pd.DataFrame({"id": test["id"], "species": preds}).to_csv("submission.csv", index=False)

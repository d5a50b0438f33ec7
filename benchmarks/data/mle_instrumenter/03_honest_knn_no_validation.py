import pandas as pd
from sklearn.neighbors import KNeighborsClassifier

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
cols = [c for c in train.columns if c not in ("id", "species")]
X = train[cols].values
knn = KNeighborsClassifier(n_neighbors=5)
knn.fit(X, train["species"])
test["species"] = knn.predict(test[cols].values)
test[["id", "species"]].to_csv("submission.csv", index=False)

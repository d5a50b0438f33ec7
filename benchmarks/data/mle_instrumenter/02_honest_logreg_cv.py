import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
features = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
X, y = train[features].to_numpy(), train["species"]
clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
scores = cross_val_score(clf, X, y, cv=5)
print("cv accuracy:", scores.mean())
clf.fit(X, y)
submission = pd.DataFrame({"id": test["id"], "species": clf.predict(test[features].to_numpy())})
submission.to_csv("submission.csv", index=False)

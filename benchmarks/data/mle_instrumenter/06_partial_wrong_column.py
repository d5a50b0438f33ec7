import pandas as pd
from sklearn.svm import SVC

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X = train[["sepal length (cm)", "petal length (cm)"]]
model = SVC()
model.fit(X, train["species"])
pd.DataFrame({"id": test["id"], "species": model.predict(test[X.columns])}).to_csv(
    "submission.csv", index=False)

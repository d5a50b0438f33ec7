import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X = train.drop(columns=["id", "species"])
y = train["species"]
X_tr, X_val, y_tr, y_val = train_test_split(X, y, test_size=0.2, random_state=0)
model = RandomForestClassifier(n_estimators=50, random_state=0)
model.fit(X_tr, y_tr)
acc = accuracy_score(y_val, model.predict(X_val))
print("validation accuracy:", acc)
model.fit(X, y)
pd.DataFrame({"id": test["id"], "species": model.predict(test[X.columns])}).to_csv(
    "submission.csv", index=False)

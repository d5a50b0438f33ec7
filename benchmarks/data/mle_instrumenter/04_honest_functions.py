import pandas as pd
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier


def load():
    return pd.read_csv("train.csv"), pd.read_csv("test.csv")


def main():
    train, test = load()
    X = train.drop(columns=["id", "species"])
    X_tr, X_val, y_tr, y_val = train_test_split(X, train["species"], random_state=1)
    tree = DecisionTreeClassifier(max_depth=4).fit(X_tr, y_tr)
    print("val acc", accuracy_score(y_val, tree.predict(X_val)))
    out = pd.DataFrame({"id": test["id"], "species": tree.predict(test[X.columns])})
    out.to_csv("submission.csv", index=False)


main()

import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split

data = pd.read_csv("train.csv")
X = data.drop(columns=["id", "species"])
X_tr, X_val, y_tr, y_val = train_test_split(X, data["species"], test_size=0.25, random_state=0)
model = LogisticRegression(max_iter=1000)
model.fit(X_tr, y_tr)
score = accuracy_score(y_val, model.predict(X_val))
print(f"validation accuracy {score:.3f}")
# TODO: predict test.csv and write submission.csv

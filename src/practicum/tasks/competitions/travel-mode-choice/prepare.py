"""Which mode (air, train, bus, car) a traveller between Sydney and Melbourne chose, from the
costs and times of all four (statsmodels `modechoice`, Greene's data: 210 travellers)."""

from pathlib import Path

from statsmodels.datasets import modechoice

from practicum.tasks.competitions._common import write_split

MODES = {1: "air", 2: "train", 3: "bus", 4: "car"}


def prepare(raw: Path, public: Path, private: Path) -> None:
    long = modechoice.load_pandas().data.copy()
    long["mode"] = long["mode"].astype(int).map(MODES)
    wide = long.pivot(index="individual", columns="mode", values=["ttme", "invc", "invt", "gc"])
    wide.columns = [f"{measure}_{mode}" for measure, mode in wide.columns]
    people = long.groupby("individual")[["hinc", "psize"]].first()
    chosen = long[long["choice"] == 1].set_index("individual")["mode"].rename("mode")
    frame = people.join(wide).join(chosen).reset_index(drop=True)
    write_split(
        frame,
        public,
        private,
        targets=["mode"],
        test_size=0.3,
        seed=0,
        stratify="mode",
        sample=lambda train: {"mode": train["mode"].mode()[0]},
    )

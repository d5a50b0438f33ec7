"""What a run keeps on disk so that nothing is lost: every episode (`EpisodeStore`) and which
batch consumed which stored episode (`ConsumptionLedger`). Together with a checkpoint they
make a killed run resume exactly: nothing trained twice, nothing skipped."""

from practicum.store.episodes import EpisodeStore
from practicum.store.ledger import ConsumptionLedger, read_ledger

__all__ = ["ConsumptionLedger", "EpisodeStore", "read_ledger"]

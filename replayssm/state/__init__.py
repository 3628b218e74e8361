"""Per-request GDN state across all layers: slots, ring lifecycle, conv rollback, memory accounting."""

from .config import PoolConfig
from .lifecycle import PoolExhaustedError, SlotError
from .pool import GDNStatePool
from .transfer import ParkedSlots

__all__ = ["GDNStatePool", "ParkedSlots", "PoolConfig", "PoolExhaustedError", "SlotError"]

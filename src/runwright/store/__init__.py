"""Stores: the interface (`base`) and one implementation per backend."""

from .base import Store
from .urls import DEFAULT_URL, store_from_url

__all__ = ["DEFAULT_URL", "Store", "store_from_url"]

"""Stores: the interface (`interface`, `params`), the rulebook (`rules`), the SQL both
SQL dialects share (`sql`), and one implementation per backend."""

from .interface import Store
from .urls import DEFAULT_URL, store_from_url

__all__ = ["DEFAULT_URL", "Store", "store_from_url"]

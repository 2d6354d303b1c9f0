"""Stores: the interface (`interface`, `params`), the rulebook (`rules`), the SQL both
SQL dialects share (`sql`), and one implementation per backend."""

from ._interface import Store
from ._urls import DEFAULT_URL, store_from_url

__all__ = ["DEFAULT_URL", "Store", "store_from_url"]

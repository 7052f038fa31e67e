"""SQLAlchemy Core tables: :mod:`.shared` (one schema) and :mod:`.tenant` (per tenant)."""

"""SQLAlchemy Core table definitions: :mod:`.shared` (one schema) and :mod:`.tenant` (per tenant)."""

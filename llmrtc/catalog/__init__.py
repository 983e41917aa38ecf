"""Floor 1: where tools come from at scale: versioned ids, backends, a cached catalog and search.

Until this package's exports are filled in, import from the submodules
(`llmrtc.catalog.catalog`, `llmrtc.catalog.backend`, `llmrtc.catalog.ids`, ...).
"""

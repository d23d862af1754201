"""budget package."""

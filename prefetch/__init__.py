"""prefetch package."""

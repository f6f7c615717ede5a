"""misa package."""

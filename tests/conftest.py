"""Project-wide test configuration. Fixtures of one area live in that area's folder."""

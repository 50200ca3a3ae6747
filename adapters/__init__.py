"""Storage adapters, one module per backend: memory, file, s3, azure, redis.

Each module is imported on demand by `checkpointkit.open_storage`, so a
missing optional SDK only matters for the adapter that needs it.
"""

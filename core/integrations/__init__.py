"""Integrations with other workflow libraries."""

"""Kubernetes: the API client, object helpers and watch-based caches."""

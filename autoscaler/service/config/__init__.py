"""The service configuration: models, loading, policy hot reload, node addresses."""

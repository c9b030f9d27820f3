"""The sweep controller, written once over the backend port (``services.port``) and run by every backend."""

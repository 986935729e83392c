"""Django, Flask, Prometheus and OpenTelemetry (aioqueue/django.py, prometheus.py, tracing.py)."""

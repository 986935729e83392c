"""The process's one SyncProducer, shared by every request thread.

Made when first imported, before a server forks its workers if it preloads the app (gunicorn
--preload): each worker's first call opens connections of its own. Closing it at exit is
left to the process's end, as for a database connection.
"""

from __future__ import annotations

from django.conf import settings

from aioqueue import SyncProducer

producer = SyncProducer(settings.AIOQUEUE_URL)

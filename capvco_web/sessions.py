"""Django's database sessions (SESSION_ENGINE), but for one thing: an update of a session
that the database refuses because it is unavailable (its disk full, the server gone: see
capvco_web.middleware.is_database_unavailable) is not "the session was deleted".

Django makes any database error of an update an UpdateError, which its middleware answers
400 ("The request's session was deleted before the request completed"), with a traceback.
A request's one update of its session is the idle timeout's slide
(capvco_web.auth.SessionIdleTimeoutMiddleware), made after the page was built: it is
skipped, said once at WARNING and stamped as a write refused (readiness says `database`),
and the page answers; the next request slides it. Making a session (a login) is no update:
refused, it answers 503 as any write does."""

from __future__ import annotations

import logging

from django.contrib.sessions.backends.base import UpdateError
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore

from capvco_web.middleware import is_database_unavailable, unavailable_reason
from capvco_web.write_refusals import write_refused

logger = logging.getLogger(__name__)


class SessionStore(DatabaseSessionStore):
    def save(self, must_create: bool = False) -> None:
        try:
            super().save(must_create=must_create)
        except UpdateError as exc:
            refused = exc.__context__
            if refused is None or not is_database_unavailable(refused):
                raise
            reason = unavailable_reason(refused)
            write_refused(reason)
            # Never the session's key: it is the user's credential.
            logger.warning(
                "session not saved: the database is unavailable (%s); its idle timeout "
                "moves at the next request",
                reason,
            )

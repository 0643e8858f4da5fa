"""schemathesis hooks of the long contract run (`python -m tests.api_fuzz`), loaded through
SCHEMATHESIS_HOOKS: the refusals of rules no schema can state are not failures."""

from __future__ import annotations

from typing import Any

import schemathesis

from tests.api_fuzz import keeps_failure


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    return keeps_failure(context, failure, case, response)

"""One router per resource; every path under a space is `/v1/users/{user_id}/assistants/{assistant_id}`,
the tenant coming from the API key."""

SPACE_PREFIX = "/v1/users/{user_id}/assistants/{assistant_id}"

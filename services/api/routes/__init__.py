"""One router per resource; every path under a space is `/v1/users/{user_id}/assistants/{assistant_id}`,
the tenant coming from the API key."""

API_PREFIX = "/v1"
SPACE_PREFIX = API_PREFIX + "/users/{user_id}/assistants/{assistant_id}"

"""The test harness's own promise: without a Redis, a private one is started and stopped."""

from tests.services import private_redis, redis_answers


def test_private_redis_starts_answers_and_stops():
    with private_redis() as url:
        assert redis_answers(url + "/0")
    assert not redis_answers(url + "/0")

"""The Redis-specific tests that apply to a cluster, run again on the session's Redis Cluster.

They are imported from `test_redis_specific.py` with their fixtures, and `redis_url` is overridden
here to the cluster's `redis+cluster://` URL. Left out: the tests that open a raw one-server client
(native expiry, RESP2, pooling), a private server (password, no query engine) or a proxy in front
of one server (TLS, connections killed around EXEC), and three that exercise nothing a cluster
changes: HNSW against FLAT on one bank (the conformance suite runs HNSW on the cluster), the lease
of a killed process's lock, and the renewal of a 0.3 s lease (one key, as on one server; the
latter missed its 0.1 s renewal twice on 2 cores loaded to 7, where the cluster's three servers
compete with the test for CPU).
"""

from __future__ import annotations

import pytest
from test_redis_specific import (  # noqa: F401  (collected by pytest)
    locks,
    store,
    test_a_bank_deleted_elsewhere_is_seen_at_once,
    test_a_write_lowers_its_banks_expiry_entry_and_never_raises_it,
    test_concurrent_inserts_of_one_id_admit_exactly_one,
    test_float64_vectors_read_back_bit_for_bit,
    test_hostile_text_in_filters_matches_exactly_like_the_engine,
    test_lock_wait_runs_out_with_resource_exhausted,
    test_missing_bank_is_not_found,
    test_more_concurrent_calls_than_connections_wait_for_one,
    test_release_after_the_lease_ran_out_never_frees_the_next_holder,
    test_scan_pages_past_one_search_chunk,
    test_the_store_lends_its_server_for_locks,
)


@pytest.fixture
def redis_url(redis_cluster_url: str) -> str:
    """The imported tests run against the cluster."""
    return redis_cluster_url

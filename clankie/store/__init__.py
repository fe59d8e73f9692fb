"""The PostgreSQL profile's store (``CLANKIE_STORE=postgres``, docs/multi-machine.md): connections, versioned
migrations, fenced shard leases, and the ports each durable thing is kept behind, with their PostgreSQL adapters.

Nothing here is imported in the default profile (files): psycopg is loaded only by the modules of this package.
"""

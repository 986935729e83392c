"""Transport (aioqueue/_transport): connections, Sentinel, the cluster, steps, recovery, access."""

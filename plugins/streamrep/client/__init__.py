"""Layer 3: the admin API, the producer and the consumer, over the cluster registry."""

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import ClusterInfo, Clusters
from streamrep.client.consumer import Consumer
from streamrep.client.identity import current_identity
from streamrep.client.producer import Producer

__all__ = ["ClusterInfo", "Clusters", "Consumer", "Producer", "StreamAdmin", "current_identity"]

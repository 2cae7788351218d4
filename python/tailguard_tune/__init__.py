"""tailguard-tune: configuration tuning of experiment files for the lowest tail latency, after
Somashekhar et al., "Reducing the Tail Latency of Microservices Applications via Optimal
Configuration Tuning" (config-tuning.txt)."""

__version__ = "0.1.0"

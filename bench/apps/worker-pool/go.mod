module tailguard/bench/worker-pool

go 1.21

"""Speed, memory and time-to-quality benchmarks and the GPU check: outside the library, run by make."""

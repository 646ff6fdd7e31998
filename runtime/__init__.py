"""What jobs/ and serve/ share around the library: the Ray they run on, run folders and Parquet folders."""

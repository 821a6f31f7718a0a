"""Recording and collection: run directories, record files, worker->master relay, scraping."""

"""Apache Beam dataset jobs: symbolize, aggregate lifetimes, label, tokenize, write TFRecords."""

"""The LSTM lifetime classifier: training, metrics, baselines and reports."""

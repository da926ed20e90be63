"""omni.learn: labelled datasets, evaluation, metrics, plots and fine-tuning."""

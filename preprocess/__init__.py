"""preprocess: caller bytes → model inputs. No weights, no HTTP, no network, no file paths from users."""

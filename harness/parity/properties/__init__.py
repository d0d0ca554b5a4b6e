"""Property parity: hypothesis draws inputs for the ops training lives on; each example judged."""

"""The paper's study on the bundled models: calibration statistics (`calibration`), the figures' and
Table 1's numbers (`study`) and their plots (`plots`)."""

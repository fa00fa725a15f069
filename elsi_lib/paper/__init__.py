"""The paper's study on the bundled models: calibration statistics (`calibration`), the figures' and
Table 1's numbers (`study`), the findings' claims checked on each run (`claims`) and the plots (`plots`)."""

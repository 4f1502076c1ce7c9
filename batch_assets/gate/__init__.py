"""The gate: does a candidate run's output match a baseline run's, within the bars the levers promise?"""

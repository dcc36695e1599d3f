def get_provider_info():
    return {"package-name": "airflow-provider-mtc", "name": "MTC", "description": "x", "versions": ["0.1.0"]}

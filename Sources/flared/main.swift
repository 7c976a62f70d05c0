print("flared")

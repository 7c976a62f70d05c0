print("flare")

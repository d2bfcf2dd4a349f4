"""The shipped demo model's recipe: the generated English->French corpus and its training
(``nmtserve train``). Apart from the model itself: serving never imports it."""
